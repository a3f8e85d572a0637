#include <pthread.h>
#include <stdatomic.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/cpu/cpu_features.h"

static struct exl_cpu_features features;
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
/* XCR0: the register state the OS saves on a context switch. */
static unsigned long long xcr0(void)
{
	unsigned a, b, c, d, lo, hi;

	/* OSXSAVE (CPUID.1:ECX bit 27) says xgetbv may run */
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
		return 0;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((unsigned long long)hi << 32) | lo;
}

#define EXL_ARCH_REQ_XCOMP_PERM 0x1023
#define EXL_XFEATURE_XTILEDATA 18

static void detect_amx(void)
{
	unsigned a, b, c, d;

	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return;
	if ((xcr0() & (3ull << 17)) != (3ull << 17)) /* XTILECFG, XTILEDATA */
		return;
	features.amx_bf16 = d & (1u << 22);
	features.amx_tile = d & (1u << 24);
	features.amx_int8 = d & (1u << 25);
#if defined(__linux__)
	if (features.amx_tile)
		features.amx_permitted =
			syscall(SYS_arch_prctl, EXL_ARCH_REQ_XCOMP_PERM, EXL_XFEATURE_XTILEDATA) == 0;
#endif
}
#endif

#if defined(__x86_64__) || defined(__i386__)
/* Vendor "AuthenticAMD" and this CPUID family (base + extended). */
static bool is_amd_family(unsigned family)
{
	unsigned a, b, c, d;

	if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u)
		return false;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return false;
	unsigned f = (a >> 8) & 0xf;
	if (f == 0xf)
		f += (a >> 20) & 0xff;
	return f == family;
}
#endif

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
	features.split512 = features.avx512f && is_amd_family(0x19);
#endif
#if defined(__x86_64__)
	detect_amx();
#endif
}

const struct exl_cpu_features *exl_cpu_features(void)
{
	pthread_once(&features_once, detect);
	return &features;
}

static atomic_int decode16 = -1;

bool exl_cpu_decode16(void)
{
	int v = atomic_load_explicit(&decode16, memory_order_relaxed);

	return v < 0 ? !exl_cpu_features()->split512 : v != 0;
}

void exl_cpu_set_decode16(int on)
{
	atomic_store_explicit(&decode16, on < 0 ? -1 : on != 0, memory_order_relaxed);
}

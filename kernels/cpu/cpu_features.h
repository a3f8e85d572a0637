/* x86 CPU features the CPU kernels dispatch on, detected once. */
#ifndef EXL_CPU_FEATURES_H
#define EXL_CPU_FEATURES_H

#include <stdbool.h>

struct exl_cpu_features {
	bool avx2;
	bool fma;
	bool f16c;
	bool avx512f;
	bool avx512bw;
	bool avx512vl;
	bool avx512vnni;
	bool avx512bf16;
	/* The CPU runs a 512-bit operation as two 256-bit halves: AMD family
	 * 19h (Zen 4), the one such CPU with AVX-512.  There 256-bit kernels
	 * that keep twice the rows in flight decode faster, measured; on
	 * Intel's full-width units the 512-bit ones do (docs/cpu-kernels.md). */
	bool split512;
	/* AMX (CPUID.7.0:EDX bits 24, 25, 22) with the OS saving the tile
	 * state (XCR0 bits 17, 18) ... */
	bool amx_tile;
	bool amx_int8;
	bool amx_bf16;
	/* ... and Linux's permission for this process to use it, asked for once
	 * (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); false when
	 * refused (kernels before 5.16, a seccomp filter), so the AMX set is
	 * then not offered. */
	bool amx_permitted;
};

/* The features of this CPU (all false off x86-64).  Thread-safe: the first
 * call detects, later calls return the same object. */
const struct exl_cpu_features *exl_cpu_features(void);

/* Whether avx512vnni's repacked Q8_0, Q4_0, IQ4_NL and Q4_K kernels
 * decode (n <= 4) 16 rows to a vector, or with avx2vnni's 8: !split512
 * unless set.  The outputs are the same bits either way; the setter (1, 0,
 * or -1 for the CPU's choice) is for tests and benchmarks, which run both
 * on any AVX-512 CPU. */
bool exl_cpu_decode16(void);
void exl_cpu_set_decode16(int on);

#endif

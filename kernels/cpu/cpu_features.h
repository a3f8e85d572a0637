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

#endif

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
};

/* The features of this CPU (all false off x86-64).  Thread-safe: the first
 * call detects, later calls return the same object. */
const struct exl_cpu_features *exl_cpu_features(void);

#endif

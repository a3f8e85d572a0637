/* The amx set's AMX-BF16 conversions (kernels/cpu/matmul_amx_bf16.c) over
 * SIMDe's AVX-512 emulation, as exl_amx_*_simde, so test_amx_layout checks
 * them against the portable ones on CPUs without AVX-512.  Compiled with
 * the AVX2 flags, which SIMDe's emulation uses. */
#define EXL_AMX_BF16_SIMDE 1
#include "kernels/cpu/matmul_amx_bf16.c"

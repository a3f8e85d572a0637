/* The amx set's decode (kernels/cpu/matmul_amx_decode.c) over SIMDe's
 * AVX-512 emulation, as exl_amx_decode_simde, so test_amx_layout checks its
 * lanes, folds and chains on CPUs without AVX-512.  Compiled with the
 * AVX2 flags, which SIMDe's emulation uses. */
#define EXL_AMX_DECODE_SIMDE 1
#include "kernels/cpu/matmul_amx_decode.c"

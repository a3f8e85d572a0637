/* Vector versions of the AMX-BF16 body's helpers (matmul_amx_bf16.c,
 * AVX-512 F/BW and F16C): the same bits as exl_amx_stage_f16_portable and
 * exl_amx_act_bf16_portable in matmul_amx_bf16_body.h, which
 * test_amx_layout checks natively and over SIMDe. */
#ifndef EXL_CPU_MATMUL_AMX_BF16_H
#define EXL_CPU_MATMUL_AMX_BF16_H

#include <stddef.h>
#include <stdint.h>

/* A for columns [k0, k0 + 32) of nr F16 rows as bf16 hi and lo, 16 rows x
 * 32 (rows nr..15 and columns past cols zero). */
void exl_amx_stage_f16(const uint8_t *w, size_t row_bytes, int nr, int64_t k0, int64_t cols, uint16_t *hi,
		       uint16_t *lo);
/* Vectors [i0, i1) of x [n][cols] into the BF16 pair act (the amx set's
 * act_f16). */
void exl_amx_act_bf16(const float *x, int64_t cols, int n, int i0, int i1, uint8_t *act, size_t act_stride);

/* The same compiled over SIMDe's AVX-512 (test builds only,
 * tests/unit/amx_bf16_simde.c) */
void exl_amx_stage_f16_simde(const uint8_t *w, size_t row_bytes, int nr, int64_t k0, int64_t cols,
			     uint16_t *hi, uint16_t *lo);
void exl_amx_act_bf16_simde(const float *x, int64_t cols, int n, int i0, int i1, uint8_t *act,
			    size_t act_stride);

#endif

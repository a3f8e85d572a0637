/* The AVX-512 helpers of the "amx" set's tile kernels (matmul_amx.c), which
 * stand in for matmul_amx_body.h's portable ones of the same names and
 * results.  The tile kernels run only on an AMX CPU; these need only
 * AVX-512 F/BW/VL and F16C, so test_amx_layout checks each against its
 * portable twin on any AVX-512 CPU. */
#ifndef EXL_CPU_MATMUL_AMX_HELPERS_H
#define EXL_CPU_MATMUL_AMX_HELPERS_H

#include <stddef.h>
#include <stdint.h>

struct exl_amx_helpers {
	/* fmt: matmul_amx_body.h's EXL_AMX_FMT_* */
	void (*unpack_q4)(const uint8_t *w, size_t row_bytes, int64_t b, int nr, int fmt, int8_t *out);
	void (*pack_b)(const int8_t *src, size_t stride, int nr, int8_t *lo, int8_t *hi);
	void (*pack_r8)(const uint8_t *g0, const uint8_t *g1, int64_t b, int fmt, int8_t *lo, int8_t *hi,
			float *dw);
	void (*scales)(const uint8_t *w, size_t row_bytes, size_t bs, int64_t b, int nr, float *dw);
	void (*post16)(float *acc, const int32_t *dots, float dx, const float *dw);
	void (*ipost16)(int32_t *isum, const int32_t *dots, const int32_t *sc);
	void (*pack_q6_K)(const uint8_t *w, size_t row_bytes, int64_t b, int h, int s, int nr,
			  int8_t out[4][4 * 64]);
	void (*pack_iq4_xs)(const uint8_t *w, size_t row_bytes, int64_t b, int j, int nr, int8_t *lo, int8_t *hi);
};

extern const struct exl_amx_helpers exl_amx_helpers_avx512;

#endif

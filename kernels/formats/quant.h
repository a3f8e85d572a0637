/* Row quantization and dequantization in GGML's on-disk formats (reference
 * C, no SIMD): what the model tools use to write GGUF tensors, what the
 * tests use to make and check weights, and what embedding lookup uses to
 * read one row.
 */
#ifndef EXL_QUANT_H
#define EXL_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The weight types the backends compute with (matmul and embedding):
 * F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_XS. */
bool exl_dtype_supported(uint32_t type);

/* True when exl_quantize_row can write `type` (the supported set). */
bool exl_quantize_supported(uint32_t type);

/* Quantizes n floats of src into one row of `type` at dst, which must hold
 * exl_dtype_row_bytes(type, n) bytes.  Returns the bytes written, or 0 when
 * the type cannot be written or n is not a positive whole number of blocks.
 * K-quants search their scales (weighted least squares, as GGML's reference
 * quantizers do), so they are slow: meant for tools and tests, not per
 * token. */
size_t exl_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* Dequantizes n elements of a row of `type` into dst.  Types: the writable
 * set plus Q8_K.  Returns 0, or -1 for another type or an n that
 * is not a positive whole number of blocks. */
int exl_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Activation quantizers the CPU matmul uses (no scale search): d =
 * max|x| / 127 per block, so every value is in [-127, 127]; Q8_K also fills
 * in its group sums.  n a multiple of 32 (Q8_0) or 256 (Q8_K). */
void exl_quantize_row_q8_0_ref(const float *x, void *dst, int64_t n);
void exl_quantize_row_q8_K_ref(const float *x, void *dst, int64_t n);

#endif

/* Internal to the CPU matmul: the table of kernels each variant file
 * provides and the layout of the quantized activations they share.
 *
 * Activations (one "act row" per input vector, each starting 64-byte
 * aligned, act_stride bytes apart):
 *   Q8_0 act (for the 32-weight types), cols/32 blocks:
 *     int8 qs[cols] | float d[cols/32] | float s[cols/32]
 *     value k = d[k/32] * qs[k];  s[b] = d[b] * sum of block b's qs
 *   Q8_K act (for the 256-weight types), cols/256 blocks:
 *     int8 qs[cols] | float d[cols/256] | int16 bsums[cols/16]
 *     bsums[g] = sum of qs[16g .. 16g+15]
 * qs are in [-127, 127].  Every variant's activation quantizer computes
 * the same values as the scalar one (d = max|x| / 127, q = round-to-even(x
 * / d)); a variant's act_q4_0 / act_q4_K / act_iq4_xs may store a block's
 * qs in another order that its kernels expect (bsums stay in element
 * order).
 */
#ifndef EXL_CPU_MATMUL_IMPL_H
#define EXL_CPU_MATMUL_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* kernels/meson.build builds the x86 SIMD variants on x86-64 */
#if defined(__x86_64__)
#define EXL_HAVE_X86_KERNELS 1
#endif

struct exl_mm_ctx {
	const uint8_t *w;    /* weight rows, row_bytes apart */
	size_t row_bytes;
	int64_t rows;
	int64_t cols;
	const float *x;      /* float activations [n][cols] (float types) */
	const uint8_t *act;  /* quantized activations (quantized types) */
	size_t act_stride;
	float *y;            /* [n][rows] */
	int n;
};

/* Computes y[c][r] for r in [r0, r1), c in [c0, c1). */
typedef void (*exl_mm_fn)(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1);
/* Quantizes one vector of cols floats into one act row. */
typedef void (*exl_act_fn)(const float *x, uint8_t *act, int64_t cols);
/* Converts vectors [i0, i1) of the n in x ([n][cols]) into the act buffer,
 * act_stride bytes per vector, in a layout of the set's own that may mix
 * vectors (the amx set's BF16 pairs); threads take disjoint ranges. */
typedef void (*exl_act_batch_fn)(const float *x, int64_t cols, int n, int i0, int i1, uint8_t *act,
				 size_t act_stride);

struct exl_cpu_kernels {
	const char *name;
	exl_act_fn act_q8_0;  /* for Q8_0 weights */
	/* for the 32-weight types whose byte j holds weights j and j + 16:
	 * act_q4_0 for Q4_0, act_q4_1 for Q4_1, Q5_0 and Q5_1, act_iq4_nl for
	 * IQ4_NL and MXFP4.  A variant may reorder qs; one entry per kernel family so
	 * that a set made of two ("amx", "avx512vnni": matmul.c) can take a
	 * type's kernel and act from one without the others' order. */
	exl_act_fn act_q4_0;
	exl_act_fn act_q4_1;
	exl_act_fn act_iq4_nl;
	exl_act_fn act_q8_K;  /* for Q2_K, Q3_K, Q6_K weights */
	exl_act_fn act_q4_K;  /* for Q4_K, Q5_K weights: a variant may reorder qs */
	exl_act_fn act_iq4_xs; /* for IQ4_XS weights: a variant may reorder qs */
	/* for F16 (act_f16) and BF16 (act_bf16) weights, where a set
	 * converts x first, into exl_act_bf16_pairs_bytes per vector (amx:
	 * bf16 pairs, avx512bf16: x_hi and x_lo rows); NULL: mm_f16 and
	 * mm_bf16 read the floats */
	exl_act_batch_fn act_f16;
	exl_act_batch_fn act_bf16;
	exl_mm_fn mm_f32;
	exl_mm_fn mm_f16;
	exl_mm_fn mm_bf16;
	exl_mm_fn mm_q8_0;
	exl_mm_fn mm_q4_0;
	exl_mm_fn mm_q4_1;
	exl_mm_fn mm_q5_0;
	exl_mm_fn mm_q5_1;
	exl_mm_fn mm_iq4_nl;
	exl_mm_fn mm_mxfp4; /* with act_iq4_nl: a merged set moves the two together */
	exl_mm_fn mm_q2_K;
	exl_mm_fn mm_q3_K;
	exl_mm_fn mm_q4_K;
	exl_mm_fn mm_q5_K;
	exl_mm_fn mm_q6_K;
	exl_mm_fn mm_iq4_xs;
	/* Q4_0 repacked into groups of 8 rows (EXL_LAYOUT_ROWS8,
	 * kernels/cpu/repack.h), with act_q4_0; NULL where the set reads
	 * only GGUF rows.  Called with r0 a multiple of 8.  The same bits as
	 * mm_q4_0 on the rows before repacking. */
	exl_mm_fn mm_q4_0_r8;
	exl_mm_fn mm_q4_K_r8;  /* Q4_K likewise, with act_q4_K */
	exl_mm_fn mm_q8_0_r8;  /* Q8_0 likewise, with act_q8_0 */
	exl_mm_fn mm_iq4_nl_r8; /* IQ4_NL likewise, with act_iq4_nl */
};

static inline size_t exl_act_align(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

static inline size_t exl_act_q8_0_bytes(int64_t cols)
{
	return exl_act_align((size_t)cols + 2 * sizeof(float) * (size_t)(cols / 32));
}

/* x as bf16 hi and lo, cols rounded up to 32 (matmul_amx_bf16_body.h) */
static inline size_t exl_act_bf16_pairs_bytes(int64_t cols)
{
	return 4 * (size_t)((cols + 31) / 32 * 32);
}

static inline size_t exl_act_q8_K_bytes(int64_t cols)
{
	return exl_act_align((size_t)cols + sizeof(float) * (size_t)(cols / 256) +
			     sizeof(int16_t) * (size_t)(cols / 16));
}

static inline const float *exl_act_q8_0_d(const uint8_t *act, int64_t cols)
{
	return (const float *)(const void *)(act + cols);
}

static inline const float *exl_act_q8_0_s(const uint8_t *act, int64_t cols)
{
	return exl_act_q8_0_d(act, cols) + cols / 32;
}

static inline const float *exl_act_q8_K_d(const uint8_t *act, int64_t cols)
{
	return (const float *)(const void *)(act + cols);
}

static inline const int16_t *exl_act_q8_K_bsums(const uint8_t *act, int64_t cols)
{
	return (const int16_t *)(const void *)(exl_act_q8_K_d(act, cols) + cols / 256);
}

/* The kernel, and the activation it reads (act, or act_batch for the
 * float types that pack theirs), that set k takes for weights of type in
 * layout; NULL where it has none.  matmul.c's choice per call. */
void exl_cpu_kernels_for(const struct exl_cpu_kernels *k, uint32_t type, uint32_t layout, exl_mm_fn *fn,
			 exl_act_fn *act, exl_act_batch_fn *act_batch);

/* The table of the set named name as this build merges it (matmul.c),
 * whether or not this CPU runs it, so that tests check the merge on any
 * CPU; NULL for a name not built. */
const struct exl_cpu_kernels *exl_cpu_kernels_table(const char *name);

extern const struct exl_cpu_kernels exl_cpu_kernels_scalar;
#if defined(EXL_HAVE_X86_KERNELS)
extern const struct exl_cpu_kernels exl_cpu_kernels_avx2;
extern const struct exl_cpu_kernels exl_cpu_kernels_avx2vnni;
extern const struct exl_cpu_kernels exl_cpu_kernels_avx512;
/* The avx512vnni set's own 512-bit kernels; matmul.c merges them with
 * avx2vnni's into the set "avx512vnni". */
extern const struct exl_cpu_kernels exl_cpu_kernels_avx512vnni_own;
/* BF16 on vdpbf16ps (act_bf16 and mm_bf16 only), which matmul.c puts into
 * avx512vnni where the CPU has AVX-512 BF16. */
extern const struct exl_cpu_kernels exl_cpu_kernels_avx512bf16_own;
#endif
#if defined(EXL_HAVE_AMX_KERNELS)
/* The AMX set's own kernels (NULL where it uses avx512vnni's); matmul.c
 * merges the two into the set "amx". */
extern const struct exl_cpu_kernels exl_cpu_kernels_amx_own;
#endif

/* Scalar pieces the SIMD variants reuse. */
void exl_act_q8_0_scalar(const float *x, uint8_t *act, int64_t cols);
void exl_act_q8_K_scalar(const float *x, uint8_t *act, int64_t cols);

#endif

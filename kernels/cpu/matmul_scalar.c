/* The portable reference kernels: plain C, one output at a time.  Every
 * SIMD variant is tested against these. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/matmul_impl.h"
#include "kernels/formats/elem.h"

static int8_t quant_one(float v, float id)
{
	/* |v * id| <= 127 up to rounding; lrintf rounds to even like the
	 * SIMD conversions do */
	long q = lrintf(v * id);

	return (int8_t)(q < -127 ? -127 : q > 127 ? 127 : q);
}

void exl_act_q8_0_scalar(const float *x, uint8_t *act, int64_t cols)
{
	int8_t *qs = (int8_t *)act;
	float *d = (float *)(void *)(act + cols);
	float *s = d + cols / 32;

	for (int64_t b = 0; b < cols / 32; b++) {
		const float *xb = x + 32 * b;
		float amax = 0;
		int sum = 0;

		for (int i = 0; i < 32; i++)
			amax = fmaxf(amax, fabsf(xb[i]));
		float db = amax / 127.0f;
		float id = amax > 0 ? 127.0f / amax : 0.0f;

		for (int i = 0; i < 32; i++) {
			qs[32 * b + i] = quant_one(xb[i], id);
			sum += qs[32 * b + i];
		}
		d[b] = db;
		s[b] = db * (float)sum;
	}
}

void exl_act_q8_K_scalar(const float *x, uint8_t *act, int64_t cols)
{
	int8_t *qs = (int8_t *)act;
	float *d = (float *)(void *)(act + cols);
	int16_t *bsums = (int16_t *)(void *)(d + cols / 256);

	for (int64_t b = 0; b < cols / 256; b++) {
		const float *xb = x + 256 * b;
		float amax = 0;

		for (int i = 0; i < 256; i++)
			amax = fmaxf(amax, fabsf(xb[i]));
		float id = amax > 0 ? 127.0f / amax : 0.0f;

		d[b] = amax / 127.0f;
		for (int g = 0; g < 16; g++) {
			int sum = 0;

			for (int i = 16 * g; i < 16 * g + 16; i++) {
				qs[256 * b + i] = quant_one(xb[i], id);
				sum += qs[256 * b + i];
			}
			bsums[16 * b + g] = (int16_t)sum;
		}
	}
}

#define FOR_EACH_OUTPUT(m, r0, r1, c0, c1)                                  \
	for (int c = (c0); c < (c1); c++)                                   \
		for (int64_t r = (r0); r < (r1); r++)

static void mm_f32(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	FOR_EACH_OUTPUT(m, r0, r1, c0, c1) {
		const float *w = (const float *)(const void *)(m->w + (size_t)r * m->row_bytes);
		const float *x = m->x + (size_t)c * (size_t)m->cols;
		float sum = 0;

		for (int64_t k = 0; k < m->cols; k++)
			sum += w[k] * x[k];
		m->y[(size_t)c * (size_t)m->rows + (size_t)r] = sum;
	}
}

static void mm_f16(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	FOR_EACH_OUTPUT(m, r0, r1, c0, c1) {
		const uint16_t *w = (const uint16_t *)(const void *)(m->w + (size_t)r * m->row_bytes);
		const float *x = m->x + (size_t)c * (size_t)m->cols;
		float sum = 0;

		for (int64_t k = 0; k < m->cols; k++)
			sum += exl_fp16_to_fp32(w[k]) * x[k];
		m->y[(size_t)c * (size_t)m->rows + (size_t)r] = sum;
	}
}

static void mm_bf16(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	FOR_EACH_OUTPUT(m, r0, r1, c0, c1) {
		const uint16_t *w = (const uint16_t *)(const void *)(m->w + (size_t)r * m->row_bytes);
		const float *x = m->x + (size_t)c * (size_t)m->cols;
		float sum = 0;

		for (int64_t k = 0; k < m->cols; k++)
			sum += exl_bf16_to_fp32(w[k]) * x[k];
		m->y[(size_t)c * (size_t)m->rows + (size_t)r] = sum;
	}
}

static void mm_q8_0(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	int64_t nb = m->cols / 32;

	FOR_EACH_OUTPUT(m, r0, r1, c0, c1) {
		const block_q8_0 *w = (const block_q8_0 *)(const void *)(m->w + (size_t)r * m->row_bytes);
		const uint8_t *act = m->act + (size_t)c * m->act_stride;
		const int8_t *xq = (const int8_t *)act;
		const float *xd = exl_act_q8_0_d(act, m->cols);
		float sum = 0;

		for (int64_t b = 0; b < nb; b++) {
			int isum = 0;

			for (int i = 0; i < 32; i++)
				isum += w[b].qs[i] * xq[32 * b + i];
			sum += (float)isum * (exl_fp16_to_fp32(w[b].d) * xd[b]);
		}
		m->y[(size_t)c * (size_t)m->rows + (size_t)r] = sum;
	}
}

static void mm_q4_0(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	int64_t nb = m->cols / 32;

	FOR_EACH_OUTPUT(m, r0, r1, c0, c1) {
		const block_q4_0 *w = (const block_q4_0 *)(const void *)(m->w + (size_t)r * m->row_bytes);
		const uint8_t *act = m->act + (size_t)c * m->act_stride;
		const int8_t *xq = (const int8_t *)act;
		const float *xd = exl_act_q8_0_d(act, m->cols);
		float sum = 0;

		for (int64_t b = 0; b < nb; b++) {
			const int8_t *xb = xq + 32 * b;
			int isum = 0;

			for (int j = 0; j < 16; j++) {
				isum += ((w[b].qs[j] & 0x0f) - 8) * xb[j];
				isum += ((w[b].qs[j] >> 4) - 8) * xb[j + 16];
			}
			sum += (float)isum * (exl_fp16_to_fp32(w[b].d) * xd[b]);
		}
		m->y[(size_t)c * (size_t)m->rows + (size_t)r] = sum;
	}
}

/* The 32-weight types with a Q8_0 act: per block an exact integer dot of
 * the levels with x's, scaled by d_w * d_x; Q4_1 / Q5_1 add m_w * s_x,
 * their offset times x's block sum.  LEVEL(w, j) is weight j's level,
 * SCALE(w) the block's d_w. */
#define DEFINE_MM_32(NAME, BLOCK, LEVEL, SCALE, HAS_MIN, MIN)                                      \
	static void mm_##NAME(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1) \
	{                                                                                     \
		int64_t nb = m->cols / 32;                                                    \
                                                                                              \
		FOR_EACH_OUTPUT(m, r0, r1, c0, c1) {                                          \
			const BLOCK *w = (const BLOCK *)(const void *)(m->w + (size_t)r * m->row_bytes); \
			const uint8_t *act = m->act + (size_t)c * m->act_stride;              \
			const int8_t *xq = (const int8_t *)act;                               \
			const float *xd = exl_act_q8_0_d(act, m->cols);                       \
			const float *xs = exl_act_q8_0_s(act, m->cols);                       \
			float sum = 0;                                                        \
                                                                                              \
			for (int64_t b = 0; b < nb; b++) {                                    \
				const int8_t *xb = xq + 32 * b;                               \
				int isum = 0;                                                 \
                                                                                              \
				for (int j = 0; j < 32; j++)                                  \
					isum += LEVEL(&w[b], j) * xb[j];                      \
				sum += (float)isum * (SCALE(&w[b]) * xd[b]);                  \
				if (HAS_MIN)                                                  \
					sum += MIN(&w[b]) * xs[b];                            \
			}                                                                     \
			m->y[(size_t)c * (size_t)m->rows + (size_t)r] = sum;                  \
		}                                                                             \
	}

/* nibble j of a block whose byte j holds weights j and j + 16 */
static inline int nib(const uint8_t *qs, int j)
{
	return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;
}

static inline int fifth(const uint8_t *qh, int j)
{
	return (int)((exl_q5_qh(qh) >> j) & 1) << 4;
}

#define LEVEL_Q4_1(w, j) nib((w)->qs, j)
#define LEVEL_Q5_0(w, j) (nib((w)->qs, j) + fifth((w)->qh, j) - 16)
#define LEVEL_Q5_1(w, j) (nib((w)->qs, j) + fifth((w)->qh, j))
#define LEVEL_IQ4_NL(w, j) exl_iq4nl_value(nib((w)->qs, j))
#define LEVEL_MXFP4(w, j) exl_mxfp4_value(nib((w)->qs, j))

#define SCALE_F16(w) exl_fp16_to_fp32((w)->d)
/* 2^(e - 128); the block struct is all bytes, so any address reads */
#define SCALE_E8M0(w) exl_e8m0_half((w)->e)

#define MIN_Q4_1(w) exl_fp16_to_fp32((w)->m)
#define MIN_Q5_1(w) exl_fp16_to_fp32((w)->m)
#define MIN_NONE(w) 0.0f

DEFINE_MM_32(q4_1, block_q4_1, LEVEL_Q4_1, SCALE_F16, 1, MIN_Q4_1)
DEFINE_MM_32(q5_0, block_q5_0, LEVEL_Q5_0, SCALE_F16, 0, MIN_NONE)
DEFINE_MM_32(q5_1, block_q5_1, LEVEL_Q5_1, SCALE_F16, 1, MIN_Q5_1)
DEFINE_MM_32(iq4_nl, block_iq4_nl, LEVEL_IQ4_NL, SCALE_F16, 0, MIN_NONE)
DEFINE_MM_32(mxfp4, block_mxfp4, LEVEL_MXFP4, SCALE_E8M0, 0, MIN_NONE)

static void mm_q4_K(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	int64_t nb = m->cols / 256;

	FOR_EACH_OUTPUT(m, r0, r1, c0, c1) {
		const block_q4_K *w = (const block_q4_K *)(const void *)(m->w + (size_t)r * m->row_bytes);
		const uint8_t *act = m->act + (size_t)c * m->act_stride;
		const int8_t *xq = (const int8_t *)act;
		const float *xd = exl_act_q8_K_d(act, m->cols);
		const int16_t *bsums = exl_act_q8_K_bsums(act, m->cols);
		float sum = 0;

		for (int64_t b = 0; b < nb; b++) {
			const int8_t *xb = xq + 256 * b;
			const int16_t *bs = bsums + 16 * b;
			int isum = 0, msum = 0;

			for (int j = 0; j < 8; j++) {
				uint8_t sc, mn;
				const uint8_t *q = w[b].qs + 32 * (j / 2);
				int shift = 4 * (j & 1);
				int dot = 0;

				exl_get_scale_min_k4(j, w[b].scales, &sc, &mn);
				for (int l = 0; l < 32; l++)
					dot += ((q[l] >> shift) & 0x0f) * xb[32 * j + l];
				isum += sc * dot;
				msum += mn * (bs[2 * j] + bs[2 * j + 1]);
			}
			float dx = xd[b];
			sum += exl_fp16_to_fp32(w[b].d) * dx * (float)isum -
			       exl_fp16_to_fp32(w[b].dmin) * dx * (float)msum;
		}
		m->y[(size_t)c * (size_t)m->rows + (size_t)r] = sum;
	}
}

static void mm_q6_K(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	int64_t nb = m->cols / 256;

	FOR_EACH_OUTPUT(m, r0, r1, c0, c1) {
		const block_q6_K *w = (const block_q6_K *)(const void *)(m->w + (size_t)r * m->row_bytes);
		const uint8_t *act = m->act + (size_t)c * m->act_stride;
		const int8_t *xq = (const int8_t *)act;
		const float *xd = exl_act_q8_K_d(act, m->cols);
		float sum = 0;

		for (int64_t b = 0; b < nb; b++) {
			const int8_t *xb = xq + 256 * b;
			int isum = 0;

			for (int h = 0; h < 2; h++) {
				const uint8_t *ql = w[b].ql + 64 * h;
				const uint8_t *qh = w[b].qh + 32 * h;
				const int8_t *sc = w[b].scales + 8 * h;
				const int8_t *xh = xb + 128 * h;
				int d[8] = { 0 };

				for (int l = 0; l < 32; l++) {
					int q1 = ((ql[l] & 0x0f) | ((qh[l] & 0x03) << 4)) - 32;
					int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] & 0x0c) << 2)) - 32;
					int q3 = ((ql[l] >> 4) | ((qh[l] & 0x30) >> 0)) - 32;
					int q4 = ((ql[l + 32] >> 4) | ((qh[l] & 0xc0) >> 2)) - 32;
					int is = l / 16;

					d[is + 0] += q1 * xh[l];
					d[is + 2] += q2 * xh[l + 32];
					d[is + 4] += q3 * xh[l + 64];
					d[is + 6] += q4 * xh[l + 96];
				}
				for (int g = 0; g < 8; g++)
					isum += sc[g] * d[g];
			}
			sum += exl_fp16_to_fp32(w[b].d) * xd[b] * (float)isum;
		}
		m->y[(size_t)c * (size_t)m->rows + (size_t)r] = sum;
	}
}

static void mm_q5_K(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	int64_t nb = m->cols / 256;

	FOR_EACH_OUTPUT(m, r0, r1, c0, c1) {
		const block_q5_K *w = (const block_q5_K *)(const void *)(m->w + (size_t)r * m->row_bytes);
		const uint8_t *act = m->act + (size_t)c * m->act_stride;
		const int8_t *xq = (const int8_t *)act;
		const float *xd = exl_act_q8_K_d(act, m->cols);
		const int16_t *bsums = exl_act_q8_K_bsums(act, m->cols);
		float sum = 0;

		for (int64_t b = 0; b < nb; b++) {
			const int8_t *xb = xq + 256 * b;
			const int16_t *bs = bsums + 16 * b;
			int isum = 0, msum = 0;

			for (int j = 0; j < 8; j++) {
				uint8_t sc, mn;
				const uint8_t *q = w[b].qs + 32 * (j / 2);
				int shift = 4 * (j & 1);
				int dot = 0;

				exl_get_scale_min_k4(j, w[b].scales, &sc, &mn);
				for (int l = 0; l < 32; l++) {
					int v = ((q[l] >> shift) & 0x0f) | ((w[b].qh[l] >> j) & 1) << 4;

					dot += v * xb[32 * j + l];
				}
				isum += sc * dot;
				msum += mn * (bs[2 * j] + bs[2 * j + 1]);
			}
			float dx = xd[b];
			sum += exl_fp16_to_fp32(w[b].d) * dx * (float)isum -
			       exl_fp16_to_fp32(w[b].dmin) * dx * (float)msum;
		}
		m->y[(size_t)c * (size_t)m->rows + (size_t)r] = sum;
	}
}

/* Q2_K: per group of 16, its 4-bit scale times the dot of the 2-bit
 * levels, less its 4-bit min times x's group sum. */
static void mm_q2_K(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	int64_t nb = m->cols / 256;

	FOR_EACH_OUTPUT(m, r0, r1, c0, c1) {
		const block_q2_K *w = (const block_q2_K *)(const void *)(m->w + (size_t)r * m->row_bytes);
		const uint8_t *act = m->act + (size_t)c * m->act_stride;
		const int8_t *xq = (const int8_t *)act;
		const float *xd = exl_act_q8_K_d(act, m->cols);
		const int16_t *bsums = exl_act_q8_K_bsums(act, m->cols);
		float sum = 0;

		for (int64_t b = 0; b < nb; b++) {
			const int8_t *xb = xq + 256 * b;
			const int16_t *bs = bsums + 16 * b;
			int isum = 0, msum = 0;

			for (int g = 0; g < 16; g++) {
				/* weight 16g + l is weight 128h + 32s + l' */
				const uint8_t *q = w[b].qs + 32 * (g / 8) + 16 * (g % 2);
				int shift = 2 * ((g / 2) % 4);
				int dot = 0;

				for (int l = 0; l < 16; l++)
					dot += ((q[l] >> shift) & 3) * xb[16 * g + l];
				isum += (w[b].scales[g] & 0x0f) * dot;
				msum += (w[b].scales[g] >> 4) * bs[g];
			}
			float dx = xd[b];
			sum += exl_fp16_to_fp32(w[b].d) * dx * (float)isum -
			       exl_fp16_to_fp32(w[b].dmin) * dx * (float)msum;
		}
		m->y[(size_t)c * (size_t)m->rows + (size_t)r] = sum;
	}
}

static void mm_q3_K(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	int64_t nb = m->cols / 256;

	FOR_EACH_OUTPUT(m, r0, r1, c0, c1) {
		const block_q3_K *w = (const block_q3_K *)(const void *)(m->w + (size_t)r * m->row_bytes);
		const uint8_t *act = m->act + (size_t)c * m->act_stride;
		const int8_t *xq = (const int8_t *)act;
		const float *xd = exl_act_q8_K_d(act, m->cols);
		float sum = 0;

		for (int64_t b = 0; b < nb; b++) {
			const int8_t *xb = xq + 256 * b;
			int isum = 0;

			for (int g = 0; g < 16; g++) {
				const int c32 = g / 2; /* sub-block of 32: bit c32 of hmask */
				const uint8_t *q = w[b].qs + 32 * (g / 8) + 16 * (g % 2);
				const uint8_t *hm = w[b].hmask + 16 * (g % 2);
				int shift = 2 * (c32 % 4);
				int dot = 0;

				for (int l = 0; l < 16; l++) {
					int v = ((q[l] >> shift) & 3) - ((hm[l] >> c32) & 1 ? 0 : 4);

					dot += v * xb[16 * g + l];
				}
				isum += exl_q3_K_scale(w[b].scales, g) * dot;
			}
			sum += exl_fp16_to_fp32(w[b].d) * xd[b] * (float)isum;
		}
		m->y[(size_t)c * (size_t)m->rows + (size_t)r] = sum;
	}
}

static void mm_iq4_xs(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	int64_t nb = m->cols / 256;

	FOR_EACH_OUTPUT(m, r0, r1, c0, c1) {
		const block_iq4_xs *w = (const block_iq4_xs *)(const void *)(m->w + (size_t)r * m->row_bytes);
		const uint8_t *act = m->act + (size_t)c * m->act_stride;
		const int8_t *xq = (const int8_t *)act;
		const float *xd = exl_act_q8_K_d(act, m->cols);
		float sum = 0;

		for (int64_t b = 0; b < nb; b++) {
			const int8_t *xb = xq + 256 * b;
			int isum = 0;

			for (int j = 0; j < 8; j++) {
				const uint8_t *q = w[b].qs + 16 * j;
				int dot = 0;

				for (int l = 0; l < 32; l++)
					dot += exl_iq4nl_value(nib(q, l)) * xb[32 * j + l];
				isum += exl_iq4_xs_scale(&w[b], j) * dot;
			}
			sum += exl_fp16_to_fp32(w[b].d) * xd[b] * (float)isum;
		}
		m->y[(size_t)c * (size_t)m->rows + (size_t)r] = sum;
	}
}

const struct exl_cpu_kernels exl_cpu_kernels_scalar = {
	.name = "scalar",
	.act_q8_0 = exl_act_q8_0_scalar,
	.act_q4_0 = exl_act_q8_0_scalar,
	.act_q4_1 = exl_act_q8_0_scalar,
	.act_iq4_nl = exl_act_q8_0_scalar,
	.act_q8_K = exl_act_q8_K_scalar,
	.act_q4_K = exl_act_q8_K_scalar,
	.act_iq4_xs = exl_act_q8_K_scalar,
	.mm_f32 = mm_f32,
	.mm_f16 = mm_f16,
	.mm_bf16 = mm_bf16,
	.mm_q8_0 = mm_q8_0,
	.mm_q4_0 = mm_q4_0,
	.mm_q4_1 = mm_q4_1,
	.mm_q5_0 = mm_q5_0,
	.mm_q5_1 = mm_q5_1,
	.mm_iq4_nl = mm_iq4_nl,
	.mm_mxfp4 = mm_mxfp4,
	.mm_q2_K = mm_q2_K,
	.mm_q3_K = mm_q3_K,
	.mm_q4_K = mm_q4_K,
	.mm_q5_K = mm_q5_K,
	.mm_q6_K = mm_q6_K,
	.mm_iq4_xs = mm_iq4_xs,
};

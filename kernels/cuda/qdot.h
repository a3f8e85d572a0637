/* Dot products of quantized weight rows with 8-bit activations, 32 weights
 * ("a part") at a time: the arithmetic of the CUDA backend's matrix x vector
 * kernel (ops_matmul.cu), in C that compiles both as CUDA C++ and as C11, so
 * that a CPU unit test (tests/unit/test_cuda_qdot.c) checks every type's bit
 * layout on a machine without a GPU.
 *
 * Why 8-bit activations: a decode step reads each weight once, and the
 * kernel must keep up with the card's memory.  Dequantizing to float costs
 * several instructions a weight; with x quantized per 32 values (as the CPU
 * backend's VNNI and AMX kernels do), four weights go through one dp4a.  The
 * error this adds is x's rounding, at most half a step of its block a value,
 * bounded in the tests the same way as the CPU's.
 *
 * A part of x (cols / 32 of them a vector): 32 int8 values q and
 *   d   = amax / 127, the step;
 *   s0  = d * (q[0] + ... + q[15]),  s1 = d * (q[16] + ... + q[31]).
 * A part of a weight row decodes into 32 small integers wq (signed bytes,
 * four to an int32, weight 4i + k in byte k of int i) and, per half of 16
 * weights, a scale and an offset: w = d_h * wq + m_h.  Then
 *   sum w x = d * (d_0 * sum_0 wq q + d_1 * sum_1 wq q) + m_0 * s0 + m_1 * s1.
 * Offsets carry the types' minimums and their zero points (Q4_0's -8), so
 * the integers stay non-negative where that is cheaper to decode.
 *
 * Weight rows are at least 2-byte aligned (every block size is even) but
 * MXFP4's, whose 17-byte blocks start at any byte and are read a byte at a
 * time; 4-byte loads are used only where the block layout keeps them
 * aligned. */
#ifndef EXL_CUDA_QDOT_H
#define EXL_CUDA_QDOT_H

#include <stdint.h>
#include <string.h>

#include "kernels/formats/elem.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/formats/dtype.h"
#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <cuda_fp16.h>
#endif

struct exl_qpart {
	int32_t q[8];
	float d0, d1; /* scales of weights 0..15 and 16..31 */
	float m0, m1; /* offsets likewise */
};

/* One part of an activation: what the kernel reads besides the 32 bytes. */
struct exl_qact {
	float d, s0, s1, pad;
};

EXL_HD float exl_qd_half(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	return __half2float(__ushort_as_half(*(const uint16_t *)p));
#else
	uint16_t h;

	memcpy(&h, p, 2);
	return exl_fp16_to_fp32(h);
#endif
}

/* 32 bits from a 2-byte aligned address. */
EXL_HD uint32_t exl_qd_ld32_a2(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	const uint16_t *h = (const uint16_t *)p;

	return (uint32_t)h[0] | (uint32_t)h[1] << 16;
#else
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
#endif
}

/* 32 bits from any address (MXFP4's blocks), little-endian: four byte
 * loads on the GPU. */
EXL_HD uint32_t exl_qd_ld32_a1(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#else
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
#endif
}

/* 32 bits from a 4-byte aligned address. */
EXL_HD uint32_t exl_qd_ld32(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	return *(const uint32_t *)p;
#else
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
#endif
}

EXL_HD int exl_qd_dp4a(int32_t a, int32_t b, int acc)
{
#ifdef __CUDA_ARCH__
	return __dp4a(a, b, acc);
#else
	for (int k = 0; k < 4; k++)
		acc += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * k)) *
		       (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * k));
	return acc;
#endif
}

/* sum w x of a decoded part with an activation part (xq: its 32 bytes as 8
 * int32). */
EXL_HD float exl_qpart_dot(const struct exl_qpart *p, const int32_t *xq, struct exl_qact a)
{
	int s0 = 0, s1 = 0;

	for (int i = 0; i < 4; i++) {
		s0 = exl_qd_dp4a(p->q[i], xq[i], s0);
		s1 = exl_qd_dp4a(p->q[4 + i], xq[4 + i], s1);
	}
	return a.d * (p->d0 * (float)s0 + p->d1 * (float)s1) + p->m0 * a.s0 + p->m1 * a.s1;
}

EXL_HD void exl_qpart_scale(struct exl_qpart *p, float d, float m)
{
	p->d0 = p->d1 = d;
	p->m0 = p->m1 = m;
}

/* The 16 bytes of nibbles of a 32-weight block at p, as 4 words; a2: p
 * is only 2-byte aligned. */
EXL_HD void exl_qd_words4(const uint8_t *p, int a2, uint32_t *w)
{
	for (int i = 0; i < 4; i++)
		w[i] = a2 ? exl_qd_ld32_a2(p + 4 * i) : exl_qd_ld32(p + 4 * i);
}

/* Nibble words: byte j of a 16-byte run holds weight j (low nibble) and
 * j + 16 (high), as in Q4_0. */
EXL_HD void exl_qd_nibbles(struct exl_qpart *p, const uint32_t *w)
{
	for (int i = 0; i < 4; i++) {
		p->q[i] = (int32_t)(w[i] & 0x0f0f0f0fu);
		p->q[4 + i] = (int32_t)((w[i] >> 4) & 0x0f0f0f0fu);
	}
}

/* The fifth bits of Q5_0 / Q5_1 (bit j of qh for weight j) into bit 4 of
 * each byte. */
EXL_HD void exl_qd_fifth(struct exl_qpart *p, uint32_t qh)
{
	for (int i = 0; i < 8; i++) {
		uint32_t b = (qh >> (4 * i)) & 0xfu;
		/* bits 0..3 of b to bit 4 of bytes 0..3 */
		uint32_t spread = (b & 1u) | (b & 2u) << 7 | (b & 4u) << 14 | (b & 8u) << 21;

		p->q[i] |= (int32_t)(spread << 4);
	}
}

/* IQ4_NL's levels for four nibbles in the bytes of v. */
EXL_HD int32_t exl_qd_iq4nl4(uint32_t v)
{
	uint32_t r = 0;

	for (int k = 0; k < 4; k++)
		r |= (uint32_t)(uint8_t)exl_iq4nl_value((int)((v >> (8 * k)) & 0xfu)) << (8 * k);
	return (int32_t)r;
}

EXL_HD void exl_qd_iq4nl_words(struct exl_qpart *p, const uint32_t *w)
{
	for (int i = 0; i < 4; i++) {
		p->q[i] = exl_qd_iq4nl4(w[i] & 0x0f0f0f0fu);
		p->q[4 + i] = exl_qd_iq4nl4((w[i] >> 4) & 0x0f0f0f0fu);
	}
}

/* MXFP4's levels (-12..12) for four nibbles in the bytes of v, as
 * exl_qd_iq4nl4 IQ4_NL's. */
EXL_HD int32_t exl_qd_mxfp4x4(uint32_t v)
{
	uint32_t r = 0;

	for (int k = 0; k < 4; k++)
		r |= (uint32_t)(uint8_t)exl_mxfp4_value((int)((v >> (8 * k)) & 0xfu)) << (8 * k);
	return (int32_t)r;
}

/* ---- the 32-weight types: part c is block c ---------------------------- */

EXL_HD void exl_qpart_q8_0(const uint8_t *row, int c, struct exl_qpart *p)
{
	const uint8_t *b = row + 34 * (size_t)c;

	for (int i = 0; i < 8; i++)
		p->q[i] = (int32_t)exl_qd_ld32_a2(b + 2 + 4 * i);
	exl_qpart_scale(p, exl_qd_half(b), 0.0f);
}

EXL_HD void exl_qpart_q4_0(const uint8_t *row, int c, struct exl_qpart *p)
{
	const uint8_t *b = row + 18 * (size_t)c;
	uint32_t w[4];
	float d = exl_qd_half(b);

	exl_qd_words4(b + 2, 1, w);
	exl_qd_nibbles(p, w);
	exl_qpart_scale(p, d, -8.0f * d);
}

EXL_HD void exl_qpart_q4_1(const uint8_t *row, int c, struct exl_qpart *p)
{
	const uint8_t *b = row + 20 * (size_t)c;
	uint32_t w[4];

	exl_qd_words4(b + 4, 0, w);
	exl_qd_nibbles(p, w);
	exl_qpart_scale(p, exl_qd_half(b), exl_qd_half(b + 2));
}

EXL_HD void exl_qpart_q5_0(const uint8_t *row, int c, struct exl_qpart *p)
{
	const uint8_t *b = row + 22 * (size_t)c;
	uint32_t w[4];
	float d = exl_qd_half(b);

	exl_qd_words4(b + 6, 1, w);
	exl_qd_nibbles(p, w);
	exl_qd_fifth(p, exl_qd_ld32_a2(b + 2));
	exl_qpart_scale(p, d, -16.0f * d);
}

EXL_HD void exl_qpart_q5_1(const uint8_t *row, int c, struct exl_qpart *p)
{
	const uint8_t *b = row + 24 * (size_t)c;
	uint32_t w[4];

	exl_qd_words4(b + 8, 0, w);
	exl_qd_nibbles(p, w);
	exl_qd_fifth(p, exl_qd_ld32(b + 4));
	exl_qpart_scale(p, exl_qd_half(b), exl_qd_half(b + 2));
}

EXL_HD void exl_qpart_iq4_nl(const uint8_t *row, int c, struct exl_qpart *p)
{
	const uint8_t *b = row + 18 * (size_t)c;
	uint32_t w[4];

	exl_qd_words4(b + 2, 1, w);
	exl_qd_iq4nl_words(p, w);
	exl_qpart_scale(p, exl_qd_half(b), 0.0f);
}

/* 17 bytes: e (the scale 2^(e - 128), exl_e8m0_half), then IQ4_NL's
 * nibbles at any alignment. */
EXL_HD void exl_qpart_mxfp4(const uint8_t *row, int c, struct exl_qpart *p)
{
	const uint8_t *b = row + 17 * (size_t)c;

	for (int i = 0; i < 4; i++) {
		uint32_t w = exl_qd_ld32_a1(b + 1 + 4 * i);

		p->q[i] = exl_qd_mxfp4x4(w & 0x0f0f0f0fu);
		p->q[4 + i] = exl_qd_mxfp4x4((w >> 4) & 0x0f0f0f0fu);
	}
	exl_qpart_scale(p, exl_e8m0_half(b[0]), 0.0f);
}

/* ---- the 256-weight types: part c is sub-block c % 8 of block c / 8 ---- */

EXL_HD void exl_qpart_q4_K(const uint8_t *row, int c, struct exl_qpart *p)
{
	const uint8_t *b = row + 144 * (size_t)(c / 8);
	const int j = c % 8;
	const uint8_t *q = b + 16 + 32 * (j / 2);
	const int shift = 4 * (j & 1);
	uint8_t sc, mn;

	for (int i = 0; i < 8; i++)
		p->q[i] = (int32_t)((exl_qd_ld32(q + 4 * i) >> shift) & 0x0f0f0f0fu);
	exl_get_scale_min_k4(j, b + 4, &sc, &mn);
	exl_qpart_scale(p, exl_qd_half(b) * (float)sc, -(exl_qd_half(b + 2) * (float)mn));
}

EXL_HD void exl_qpart_q5_K(const uint8_t *row, int c, struct exl_qpart *p)
{
	const uint8_t *b = row + 176 * (size_t)(c / 8);
	const int j = c % 8;
	const uint8_t *qh = b + 16;
	const uint8_t *q = b + 48 + 32 * (j / 2);
	const int shift = 4 * (j & 1);
	uint8_t sc, mn;

	for (int i = 0; i < 8; i++) {
		uint32_t lo = (exl_qd_ld32(q + 4 * i) >> shift) & 0x0f0f0f0fu;
		uint32_t hi = (exl_qd_ld32(qh + 4 * i) >> j) & 0x01010101u;

		p->q[i] = (int32_t)(lo | hi << 4);
	}
	exl_get_scale_min_k4(j, b + 4, &sc, &mn);
	exl_qpart_scale(p, exl_qd_half(b) * (float)sc, -(exl_qd_half(b + 2) * (float)mn));
}

EXL_HD void exl_qpart_q6_K(const uint8_t *row, int c, struct exl_qpart *p)
{
	const uint8_t *b = row + 210 * (size_t)(c / 8);
	const int j = c % 8;
	const int h = j / 4, r = j % 4;
	const uint8_t *ql = b + 64 * h + 32 * (r & 1);
	const uint8_t *qh = b + 128 + 32 * h;
	const int8_t *sc = (const int8_t *)(b + 192 + 8 * h + 2 * r);
	const int lo_shift = 4 * (r >> 1), hi_shift = 2 * r;
	float d = exl_qd_half(b + 208);

	for (int i = 0; i < 8; i++) {
		uint32_t lo = (exl_qd_ld32_a2(ql + 4 * i) >> lo_shift) & 0x0f0f0f0fu;
		uint32_t hi = (exl_qd_ld32_a2(qh + 4 * i) >> hi_shift) & 0x03030303u;

		p->q[i] = (int32_t)(lo | hi << 4);
	}
	p->d0 = d * (float)sc[0];
	p->d1 = d * (float)sc[1];
	p->m0 = -32.0f * p->d0;
	p->m1 = -32.0f * p->d1;
}

EXL_HD void exl_qpart_q2_K(const uint8_t *row, int c, struct exl_qpart *p)
{
	const uint8_t *b = row + 84 * (size_t)(c / 8);
	const int j = c % 8;
	const uint8_t *q = b + 16 + 32 * (j / 4);
	const int shift = 2 * (j % 4);
	const uint8_t sc0 = b[2 * j], sc1 = b[2 * j + 1];
	float d = exl_qd_half(b + 80), dmin = exl_qd_half(b + 82);

	for (int i = 0; i < 8; i++)
		p->q[i] = (int32_t)((exl_qd_ld32(q + 4 * i) >> shift) & 0x03030303u);
	p->d0 = d * (float)(sc0 & 0x0f);
	p->d1 = d * (float)(sc1 & 0x0f);
	p->m0 = -(dmin * (float)(sc0 >> 4));
	p->m1 = -(dmin * (float)(sc1 >> 4));
}

EXL_HD void exl_qpart_q3_K(const uint8_t *row, int c, struct exl_qpart *p)
{
	const uint8_t *b = row + 110 * (size_t)(c / 8);
	const int j = c % 8;
	const uint8_t *hm = b;
	const uint8_t *q = b + 32 + 32 * (j / 4);
	const int shift = 2 * (j % 4);
	float d = exl_qd_half(b + 108);

	/* q = low bits + 4 * high bit, 0..7, with the offset -4 */
	for (int i = 0; i < 8; i++) {
		uint32_t lo = (exl_qd_ld32_a2(q + 4 * i) >> shift) & 0x03030303u;
		uint32_t hi = (exl_qd_ld32_a2(hm + 4 * i) >> j) & 0x01010101u;

		p->q[i] = (int32_t)(lo | hi << 2);
	}
	p->d0 = d * (float)exl_q3_K_scale(b + 96, 2 * j);
	p->d1 = d * (float)exl_q3_K_scale(b + 96, 2 * j + 1);
	p->m0 = -4.0f * p->d0;
	p->m1 = -4.0f * p->d1;
}

EXL_HD void exl_qpart_iq4_xs(const uint8_t *row, int c, struct exl_qpart *p)
{
	const block_iq4_xs *blk = (const block_iq4_xs *)(const void *)(row + 136 * (size_t)(c / 8));
	const uint8_t *b = (const uint8_t *)blk;
	const int j = c % 8;
	uint32_t w[4];

	exl_qd_words4(b + 8 + 16 * j, 0, w);
	exl_qd_iq4nl_words(p, w);
	exl_qpart_scale(p, exl_qd_half(b) * (float)exl_iq4_xs_scale(blk, j), 0.0f);
}

/* Part c of a row of type t (EXL_*); with t a constant (the kernel's
 * template parameter) the switch folds away.  Other types leave p zero. */
EXL_HD void exl_qpart(uint32_t t, const uint8_t *row, int c, struct exl_qpart *p)
{
	switch (t) {
	case EXL_Q8_0: exl_qpart_q8_0(row, c, p); break;
	case EXL_Q4_0: exl_qpart_q4_0(row, c, p); break;
	case EXL_Q4_1: exl_qpart_q4_1(row, c, p); break;
	case EXL_Q5_0: exl_qpart_q5_0(row, c, p); break;
	case EXL_Q5_1: exl_qpart_q5_1(row, c, p); break;
	case EXL_IQ4_NL: exl_qpart_iq4_nl(row, c, p); break;
	case EXL_MXFP4: exl_qpart_mxfp4(row, c, p); break;
	case EXL_Q2_K: exl_qpart_q2_K(row, c, p); break;
	case EXL_Q3_K: exl_qpart_q3_K(row, c, p); break;
	case EXL_Q4_K: exl_qpart_q4_K(row, c, p); break;
	case EXL_Q5_K: exl_qpart_q5_K(row, c, p); break;
	case EXL_Q6_K: exl_qpart_q6_K(row, c, p); break;
	case EXL_IQ4_XS: exl_qpart_iq4_xs(row, c, p); break;
	default: memset(p, 0, sizeof(*p)); break;
	}
}

#endif
